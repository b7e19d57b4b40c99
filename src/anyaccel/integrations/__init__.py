"""Hand-overs to other frameworks, each in its own module, loaded only on use.

``deepspeed`` (``install()``: DeepSpeed runs on anyaccel's accelerator), ``lightning``
(``Trainer``/``Fabric(accelerator="anyaccel")`` after importing it) and ``accelerate``
(``install()``: HF accelerate and the transformers ``Trainer`` follow anyaccel's device).
"""
