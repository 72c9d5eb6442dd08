"""The only layer that knows Hydra, the command line, rendering and plots."""
