"""Fault injection from outside the stack: a store-and-forward TCP proxy for a link cut, a
dashboard client that opens the page and vanishes. Used by the tests and the chaos soak."""
