"""Root conftest: thin; the gate's options, markers and fixtures live in kdgate.pytest_gate."""

pytest_plugins = ["kdgate.pytest_gate"]
