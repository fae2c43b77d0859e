"""PyTorch: its `trainer` (`DMLModel`'s step) and `layers` (the layers' kernels)."""
