"""Converters from the published raw layouts to Sample records (one module per dataset).

`hateful_memes`, `multi3hate`, `mhc`, `toxictags`, `memebridge`: each reads one layout, validates
it, and yields a Sample or a Skipped record per input (see `base.RawSource`). Layouts, heads and
commands are in docs/datasets.md.
"""

from crossmod.data.sources.base import RawDataError, RawSource

__all__ = ["RawDataError", "RawSource"]
