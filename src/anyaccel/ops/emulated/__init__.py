"""The emulated accelerator's native core and its Python runtime (built only when installed)."""
