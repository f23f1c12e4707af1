"""Image bytes → normalised pixel batches, with the per-image work kept to what must be per image.

A timm / torchvision eval transform is `Resize → CenterCrop → ToTensor → Normalize`. Run per image,
the float conversion and normalisation cost as much as a small image's decode; they are the same
arithmetic on a stacked batch. So the transform is split at its ToTensor step: the geometry runs per
image in the loader workers and yields uint8, conversion and normalisation run once per batch in
`collate` (bit-identical results). JPEGs are decoded by torchvision's libjpeg-turbo decoder, about
half the time of PIL's for a small meme and pixel-identical to it (tested); the geometry stays
PIL's, so the model sees exactly what the per-image transform gives.

`draft=True` (opt-in) decodes JPEGs with libjpeg's DCT scaling (`Image.draft`) at the smallest scale
still at least the size the first Resize asks for, skipping most of the decode and the resize. It
changes what the model sees: DCT scaling keeps detail an antialiased resize blurs away (on the
synthetic memes an image-only model then reads enough of the rendered caption to reach val AUROC
0.83 instead of 0.73, seed 1234), so it is a speed knob to validate per dataset, not a default.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

import numpy as np
import torch
from PIL import Image
from torchvision import transforms
from torchvision.io import ImageReadMode, decode_jpeg

TO_TENSOR_STEPS = ("ToTensor", "MaybeToTensor")
JPEG_SIGNATURE = b"\xff\xd8\xff"


def _draft_size(first: object) -> tuple[int, int] | None:
    """The (width, height) a leading Resize needs at least, or None when the transform starts otherwise."""
    if not isinstance(first, transforms.Resize):
        return None
    size = first.size
    if isinstance(size, int):
        return size, size
    if len(size) == 1:
        return size[0], size[0]
    return size[1], size[0]


class PixelPipeline:
    """Decode + geometry per image (uint8 CHW), float conversion + normalisation per batch."""

    def __init__(self, transform: Callable, draft: bool = False) -> None:
        steps: Sequence = getattr(transform, "transforms", [transform])
        names = [type(step).__name__ for step in steps]
        cut = next((i for i, name in enumerate(names) if name in TO_TENSOR_STEPS), None)
        if cut is None or not all(isinstance(step, transforms.Normalize) for step in steps[cut + 1 :]):
            raise ValueError(f"cannot split image transform {names} at a ToTensor step followed only by Normalize")
        self.per_image = transform  # the unsplit transform (full-size decode): the reference the split reproduces
        self.geometry = transforms.Compose(list(steps[:cut]))
        self.normalize = transforms.Compose(list(steps[cut + 1 :]))
        self.draft_size = _draft_size(steps[0]) if draft and cut > 0 else None

    def decode(self, data: bytes) -> Image.Image:
        """RGB image; an undecodable input raises PIL's error (the caller names the sample)."""
        if self.draft_size is None and data[:3] == JPEG_SIGNATURE:
            try:
                pixels = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
            except RuntimeError:  # corrupt or unusual: PIL below decodes it or says what is wrong
                pixels = None
            if pixels is not None:
                return Image.fromarray(pixels.permute(1, 2, 0).contiguous().numpy())
        image = Image.open(io.BytesIO(data))
        if self.draft_size is not None:
            image.draft("RGB", self.draft_size)  # JPEG only; other formats ignore it
        return image.convert("RGB")

    def image(self, image: Image.Image) -> torch.Tensor:
        """One RGB image through the geometry: uint8, channels first (what ToTensor would scale)."""
        return torch.from_numpy(np.array(self.geometry(image), dtype=np.uint8)).permute(2, 0, 1)

    def batch(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        """Stacked uint8 images → float in [0, 1] → the transform's normalisation, once for the batch."""
        return self.normalize(torch.stack(list(images)).float().div_(255))
