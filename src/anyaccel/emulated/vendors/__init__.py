"""Simulated vendor runtimes over the emulated device: the vendor's API, real tensors on its type.

``modules``: a vendor's device module (``torch_npu``'s ``torch.npu``, ...) whose device state is
the emulated device's, for ``simulate_npu(emulated=True)`` and its kin; ``processes``: a whole
process (``python -m anyaccel.testing.simulated npu:2 train.py``) and the Python processes it
starts (``startup/sitecustomize.py``) on such a simulation.
"""
