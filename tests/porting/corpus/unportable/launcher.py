"""A launcher that pins GPUs per worker and queries device properties: parts only a human can port."""
import os
import subprocess
import sys

import torch


def spawn(worker_script, gpus):
    procs = []
    for rank, gpu in enumerate(gpus):
        env = dict(os.environ)
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        env["RANK"] = str(rank)
        procs.append(subprocess.Popen([sys.executable, worker_script], env=env))
    return [p.wait() for p in procs]


def describe(device):
    props = torch.cuda.get_device_properties(device)
    return f"{props.name}: {props.total_memory / 2**30:.1f} GiB"


def move(batch, device):
    return batch.cuda(device)
