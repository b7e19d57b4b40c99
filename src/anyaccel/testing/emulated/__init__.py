"""The emulated accelerator: a real PrivateUse1 device on host memory (see ``install``)."""
