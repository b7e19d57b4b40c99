"""Finding and porting CUDA-only PyTorch code: the rules, the checker and the codemod.

``anyaccel check`` runs :mod:`anyaccel.porting.checker` (stdlib ``ast``, no torch import);
``anyaccel port`` runs :mod:`anyaccel.porting.codemod`, which needs libcst (the ``port`` extra).
"""

from __future__ import annotations
