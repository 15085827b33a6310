"""Bag record and replay (rosbag2 format through the ``rosbags`` library)."""
