"""Batches cross from loader workers to the training process as one shared-memory block.

A DataLoader worker puts every tensor of a batch in its own shared-memory segment, and the training
process receives each through a file descriptor it then maps: about 0.5 ms per tensor here, paid
inside the training loop's `next()`. A meme batch is pixels, token ids, mask and one label tensor
per head: 8 or more tensors. Copied (in the worker) into one buffer and handed on as views of it,
the batch crosses as one segment (measured in bench/data_loading.py's hand-over figure).
"""

from __future__ import annotations

from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection

ALIGN = 64  # every view starts on a cache line, so any dtype's view of the bytes is aligned


def _span(tensor: torch.Tensor) -> int:
    return -(-tensor.numel() * tensor.element_size() // ALIGN) * ALIGN


def one_block(batch: Any) -> Any:
    """The same batch (dicts, lists, non-tensor values untouched) with every tensor a view of one buffer."""
    sizes: list[int] = []
    apply_to_collection(batch, torch.Tensor, lambda t: sizes.append(_span(t)))
    if len(sizes) < 2:
        return batch
    buffer = torch.empty(sum(sizes), dtype=torch.uint8)
    offset = 0

    def place(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal offset
        nbytes = tensor.numel() * tensor.element_size()
        view = buffer[offset : offset + nbytes].view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor)
        offset += _span(tensor)
        return view

    return apply_to_collection(batch, torch.Tensor, place)
