"""The split pixel pipeline equals timm's per-image transform; draft decoding stays close to it."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from crossmod.models.backbones.image import timm_transform
from crossmod.models.pixels import PixelPipeline

MODEL = "test_efficientnet.r160_in1k"


def _encoded(width: int, height: int, fmt: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    smooth = np.kron(rng.integers(0, 255, (height // 8 + 1, width // 8 + 1, 3)), np.ones((8, 8, 1)))[:height, :width]
    buffer = io.BytesIO()
    Image.fromarray(smooth.astype(np.uint8)).save(buffer, format=fmt)
    return buffer.getvalue()


def _reference(transform, data: list[bytes]) -> torch.Tensor:
    return torch.stack([transform(Image.open(io.BytesIO(d)).convert("RGB")) for d in data])


@pytest.mark.parametrize("size", [64, 96])
def test_by_default_the_batch_is_bit_identical_to_the_per_image_transform(size):
    transform = timm_transform(MODEL, size)
    pixels = PixelPipeline(transform)
    data = [_encoded(150, 97, "JPEG", 0), _encoded(97, 150, "PNG", 1), _encoded(300, 300, "JPEG", 2)]
    per_image = [pixels.image(pixels.decode(d)) for d in data]
    assert all(t.dtype == torch.uint8 for t in per_image)
    batch = pixels.batch(per_image)
    assert batch.shape == (3, 3, size, size) and batch.dtype == torch.float32
    assert torch.equal(batch, _reference(transform, data))


def test_jpegs_decode_to_pils_pixels_and_broken_ones_fail_with_pils_error():
    pixels = PixelPipeline(timm_transform(MODEL, 64))
    gray, cmyk = io.BytesIO(), io.BytesIO()
    Image.new("L", (40, 30), 90).save(gray, format="JPEG")
    Image.new("CMYK", (40, 30), (10, 20, 30, 40)).save(cmyk, format="JPEG")
    for data in (_encoded(150, 97, "JPEG", 0), gray.getvalue(), cmyk.getvalue()):
        expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert np.array_equal(np.asarray(pixels.decode(data)), expected)
    truncated = _encoded(150, 97, "JPEG", 0)[:300]
    with pytest.raises(OSError, match="truncated|Truncated"):
        pixels.decode(truncated)


def test_draft_decodes_large_jpegs_at_a_reduced_scale_close_to_the_full_decode():
    transform = timm_transform(MODEL, 64)
    pixels = PixelPipeline(transform, draft=True)
    data = [_encoded(512, 384, "JPEG", seed) for seed in range(4)]
    decoded = pixels.decode(data[0])
    assert min(decoded.size) >= 64 and decoded.size[0] < 512 / 2  # 1/4 scale: 128 × 96
    batch = pixels.batch([pixels.image(pixels.decode(d)) for d in data])
    reference = _reference(transform, data)
    assert batch.shape == reference.shape
    assert not torch.equal(batch, reference)  # draft changed the decode
    assert (batch - reference).abs().mean() < 0.1  # normalised units (≈ 0.02 of the 0–255 range)


def test_draft_leaves_small_and_png_images_as_they_are():
    pixels = PixelPipeline(timm_transform(MODEL, 64), draft=True)
    assert pixels.decode(_encoded(100, 100, "JPEG", 0)).size == (100, 100)  # < 2× the input: no scale fits
    assert pixels.decode(_encoded(512, 512, "PNG", 0)).size == (512, 512)


def test_a_transform_that_cannot_be_split_is_refused_by_name():
    odd = transforms.Compose([transforms.Resize(32), transforms.ToTensor(), transforms.RandomErasing()])
    with pytest.raises(ValueError, match="RandomErasing"):
        PixelPipeline(odd)
