"""Op builders: native kernels compiled just in time for the current accelerator."""
