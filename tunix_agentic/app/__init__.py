"""The applications: the calculator task, the demo, the command line and the public API."""
