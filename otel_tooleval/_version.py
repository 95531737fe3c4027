"""The package version, in a module of its own so that no module imports the package."""

__version__ = "0.6.1"
