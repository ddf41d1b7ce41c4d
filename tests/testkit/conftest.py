"""The model test kit's own tests run generated test files through pytest's ``pytester``."""

pytest_plugins = ["pytester"]
