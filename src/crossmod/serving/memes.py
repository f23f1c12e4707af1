"""What a `POST /v1/classify` body may hold, checked in the HTTP process before anything reaches the model.

`{"memes": [{"id": …, "text": …, "image": <base64>, "lang": …}, …]}`. Each field is checked as conversion checks a
dataset's (src/crossmod/data/sources/images.py): ids printable and unique in the request, text a string of bounded
length, images base64 that decodes to at most `max_image_bytes`, of a known signature, decoding fully within PIL's
pixel limit (no decompression bombs). A bad field is a 422 whose `loc` names it (`["body", "memes", 2, "image"]`),
never echoing the value back. The limits are the server's (`Limits`, set once before the HTTP processes start).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from crossmod.data.sources.images import check_image


@dataclass(frozen=True)
class Limits:
    """`max_memes` per request, `max_text_chars` per caption, `max_image_bytes` per decoded image."""

    max_memes: int = 64
    max_text_chars: int = 10_000
    max_image_bytes: int = 10 * 1024 * 1024


class Meme(BaseModel):
    """One meme: its id (echoed in the answer), caption, image (base64 of the file's bytes) and language."""

    model_config = ConfigDict(extra="forbid")
    limits: ClassVar[Limits] = Limits()

    id: Annotated[str, Field(description="the meme's id, echoed in its answer (printable, up to 256 characters)")]
    text: StrictStr = Field("", description="the caption (empty: none)")
    image: StrictStr | None = Field(None, description="the image file's bytes, base64-encoded (JPEG, PNG or WebP)")
    lang: StrictStr = Field("en", max_length=16, description="the caption's language code")

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError("must be a string or a whole number")
        text = str(value)
        if not text.strip() or len(text) > 256 or not text.isprintable():
            raise ValueError("must be a non-empty printable string of up to 256 characters")
        return text

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        if len(value) > cls.limits.max_text_chars:
            raise ValueError(f"holds {len(value):,} characters, above the server's limit of {cls.limits.max_text_chars:,}")
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise ValueError("holds a lone surrogate: not text a tokenizer reads")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> bytes | None:
        """The image's bytes, decoded and checked once here (the worker reads them as they are)."""
        if value is None:
            return None
        limit = cls.limits.max_image_bytes
        if len(value) > 4 * (limit // 3 + 1) + 4:  # refused before decoding: the base64 of a file over the limit
            raise ValueError(f"encodes more than the server's limit of {limit:,} bytes per image")
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("is not base64 (standard alphabet, padded)") from None
        if len(data) > limit:
            raise ValueError(f"is {len(data):,} bytes, above the server's limit of {limit:,} per image")
        problem = check_image(data)
        if problem:
            raise ValueError(problem)
        return data

    def record(self) -> dict[str, Any]:
        """The sample dict the models' preprocessors read (as `crossmod predict` reads a meme)."""
        return {"id": str(self.id), "text": self.text, "image": self.image, "lang": self.lang, "labels": {}}


class ClassifyRequest(BaseModel):
    """Memes to classify for every served culture, answered in this order."""

    model_config = ConfigDict(extra="forbid")

    memes: list[Meme] = Field(..., min_length=1, description="one or more memes (up to the server's max_memes)")

    @field_validator("memes")
    @classmethod
    def _count(cls, value: list[Meme]) -> list[Meme]:
        if len(value) > Meme.limits.max_memes:
            raise ValueError(f"holds {len(value)} memes, above the server's limit of {Meme.limits.max_memes} per request")
        return value

    @model_validator(mode="after")
    def _unique_ids(self) -> ClassifyRequest:
        seen: dict[str, int] = {}
        for position, meme in enumerate(self.memes):
            if str(meme.id) in seen:
                raise ValueError(f"memes[{position}].id is memes[{seen[str(meme.id)]}].id again: each meme's answer is found by its id")
            seen[str(meme.id)] = position
        return self


def field_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic's errors without the values sent (a caption or an image is never echoed back, nor logged)."""
    return [{"loc": list(error.get("loc", ())), "msg": str(error.get("msg", "")), "type": error.get("type", "")} for error in errors]


def from_multipart(content_type: str, body: bytes) -> dict[str, Any]:
    """A `multipart/form-data` upload of one meme (fields `id`, `text`, `lang`, and the image file as `image`) as the
    JSON body `ClassifyRequest` reads, so both encodings get the same checks; parsed by the standard library's MIME
    parser. A part without a name is refused; other unknown fields reach the request model, which names them."""
    from email import policy
    from email.parser import BytesParser

    message = BytesParser(policy=policy.HTTP).parsebytes(b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    if not message.is_multipart():
        raise ValueError("the multipart body could not be parsed (its boundary is missing or wrong)")
    meme: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name:
            raise ValueError("a multipart part has no name (Content-Disposition: form-data; name=…)")
        data = part.get_payload(decode=True) or b""
        if name == "image":
            meme["image"] = base64.b64encode(data).decode("ascii")
        else:
            try:
                meme[str(name)] = data.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"the multipart field {name!r} is not UTF-8 text") from None
    return {"memes": [meme]}
