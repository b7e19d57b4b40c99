"""The JIT machinery under ``OpBuilder``: one module per job.

``toolchain`` finds ninja and the compiler, ``plan`` describes a build and where it is cached,
``key`` hashes a build's inputs, ``trust`` decides what the cache may build in and load (no
other user's files, no links), ``lock`` serialises builds across processes, ``compiler`` runs
torch's JIT build, ``elf`` checks a cached library before the loader maps it, ``announce``
tells users a build is running, and ``cache`` ties them together: load a finished build from
disk, or build it once.
"""
