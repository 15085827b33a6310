"""excavator_common.machines without ROS: the machines a graph shows, the user's choice of one,
its topics and its frame prefix (the dashboard's selector and teleop_node's ``machine``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from excavator_common.machines import (
    MachineChoice,
    frame_prefix_from_urdf,
    machine_namespace,
    machine_topic,
    machines_on_graph,
)
from excavator_sim.urdf import generate_urdf

JS = ["sensor_msgs/msg/JointState"]


def test_the_machines_are_the_namespaces_with_joint_states() -> None:
    graph = [("/exc10/joint_states", JS), ("/exc2/joint_states", JS), ("/exc1/joint_states", JS),
             ("/exc1/joint_command", JS), ("/joint_states", JS), ("/site/a/joint_states", JS),
             ("/exc3/joint_states", ["std_msgs/msg/String"]),   # not a machine's
             ("/exc4/my_joint_states", JS), ("/clock", ["rosgraph_msgs/msg/Clock"])]
    assert machines_on_graph(graph) == ["/", "/exc1", "/exc2", "/exc10", "/site/a"]
    assert machines_on_graph([]) == []


def test_a_machine_is_named_by_its_absolute_namespace() -> None:
    assert machine_namespace("exc2") == "/exc2"
    assert machine_namespace(" /exc2/ ") == "/exc2"
    assert machine_namespace("/site/exc2") == "/site/exc2"
    assert machine_namespace("/") == "/"
    for bad in ("", "2exc", "exc-2", "exc 2", "a//b"):
        with pytest.raises(ValueError, match="namespace"):
            machine_namespace(bad)


def test_a_machines_topics_and_the_own_namespace_relative() -> None:
    assert machine_topic("/exc2", "joint_command") == "/exc2/joint_command"
    assert machine_topic("/", "joint_command") == "/joint_command"
    assert machine_topic("/exc2", "soil/wrench", own="/exc2") == "soil/wrench"
    assert machine_topic("/exc2", "soil/wrench", own="/") == "/exc2/soil/wrench"


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True))
def test_a_topic_of_a_machine_is_found_again_on_the_graph(name: str) -> None:
    ns = machine_namespace(name)
    assert machines_on_graph([(machine_topic(ns, "joint_states"), JS)]) == [ns]


def test_the_frame_prefix_comes_from_the_machines_urdf() -> None:
    assert frame_prefix_from_urdf(generate_urdf(frame_prefix="exc2/")) == "exc2/"
    assert frame_prefix_from_urdf(generate_urdf()) == ""
    with pytest.raises(ValueError, match="not XML"):
        frame_prefix_from_urdf("<robot")
    with pytest.raises(ValueError, match="0 links"):
        frame_prefix_from_urdf('<robot name="r"><link name="world"/></robot>')


def test_the_choice_is_the_users_only() -> None:
    choice = MachineChoice(own="/")
    assert choice.chosen == "/" and not choice.present
    assert choice.update(["/exc2", "/exc1"]) is True
    assert choice.update(["/exc1", "/exc2"]) is False      # same machines: no change
    assert choice.chosen == "/", "nothing is chosen for the user"
    assert choice.options() == {"/": "/ (own namespace) (not on the graph)", "/exc1": "/exc1",
                                "/exc2": "/exc2"}
    assert choice.choose("exc2") == "/exc2" and choice.present
    # a machine that is not on the graph, or no name at all: refused, the choice unchanged
    for bad, words in (("exc3", "not on the graph: choose one of /exc1, /exc2"),
                       (None, "is not a namespace"), (2, "is not a namespace"),
                       ("", "is not a namespace"), ("ex c", "not a ROS namespace")):
        with pytest.raises(ValueError, match=words):
            choice.choose(bad)
        assert choice.chosen == "/exc2"
    # the chosen machine leaves the graph: it stays chosen, shown as gone, never replaced
    choice.update(["/exc1"])
    assert choice.chosen == "/exc2" and not choice.present
    assert choice.options() == {"/exc1": "/exc1", "/exc2": "/exc2 (not on the graph)"}
    # a machine that comes later is added after those seen: no option changes its place
    choice.update(["/exc0", "/exc1", "/exc2"])
    assert list(choice.options()) == ["/exc1", "/exc2", "/exc0"]
    assert choice.options()["/exc2"] == "/exc2"
    # the own namespace can always be chosen back
    assert choice.choose("/") == "/"
    assert list(choice.options()) == ["/", "/exc1", "/exc2", "/exc0"]


def test_the_choice_at_start_is_the_machine_named_or_the_own_namespace() -> None:
    assert MachineChoice(own="/exc1").chosen == "/exc1"
    assert MachineChoice(own="/", chosen="exc2").chosen == "/exc2"
    choice = MachineChoice(own="/exc1")
    choice.update(["/exc1", "/exc2"])
    assert choice.options() == {"/exc1": "/exc1 (own namespace)", "/exc2": "/exc2"}
    choice.update(["/exc2"])
    assert choice.options() == {"/exc1": "/exc1 (own namespace) (not on the graph)",
                                "/exc2": "/exc2"}
    with pytest.raises(ValueError, match="namespace"):
        MachineChoice(own="/", chosen="1x")
