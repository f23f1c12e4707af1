"""Build a converter for a fixture layout and run it through the real shard writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossmod.data.shards import write_shards
from crossmod.data.sources.base import RawSource
from crossmod.data.sources.hateful_memes import HatefulMemesSource
from crossmod.data.sources.memebridge import MemeBridgeSource
from crossmod.data.sources.mhc import MHCSource
from crossmod.data.sources.multi3hate import Multi3HateSource
from crossmod.data.sources.toxictags import ToxicTagsSource

SOURCES: dict[str, type[RawSource]] = {
    "hateful_memes": HatefulMemesSource,
    "multi3hate": Multi3HateSource,
    "mhc": MHCSource,
    "toxictags": ToxicTagsSource,
    "memebridge": MemeBridgeSource,
}


def source(name: str, raw: Path, **options: Any) -> RawSource:
    return SOURCES[name](raw, **options)


def convert(src: RawSource, out: Path, maxcount: int = 4) -> dict[str, Any]:
    summary = src.summary()
    return write_shards(
        src,
        out,
        dataset=src.name,
        heads=src.heads,
        params=src.params(),
        maxcount=maxcount,
        allow_skip=src.on_error == "skip",
        extra={"source_summary": summary} if summary else {},
    )
