"""Image parts of request messages: `[Unsupported Image]` text on V4, image sources on V4.1."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence

from recipe.conversation import ImageDetail, ImageSource
from recipe.errors import conversion_error

IMAGE_PLACEHOLDER = "<｜image｜>"
UNSUPPORTED_IMAGE = "[Unsupported Image]"
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# data:<media type>[;parameters];base64,<data>
_DATA_URL_RE = re.compile(r"data:([^,;]*)((?:;[^,;]*)*);base64,(.*)", re.IGNORECASE | re.DOTALL)
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"})


def join_parts(parts: Sequence[str | ImageSource]) -> tuple[str, tuple[ImageSource, ...], tuple[int, ...] | None]:
    """Content parts joined by blank lines: `(content, image sources, placeholder offsets)`.

    Each image part becomes a placeholder whose code-point offset is recorded, so the renderer marks
    exactly these placeholders special and leaves any spelling of it in the texts plain (the reference
    does the same). Offsets are None when there is no image.
    """
    texts: list[str] = []
    images: list[ImageSource] = []
    offsets: list[int] = []
    at = 0
    for part in parts:
        if texts:
            at += 2
        if isinstance(part, str):
            texts.append(part)
            at += len(part)
        else:
            images.append(part)
            offsets.append(at)
            texts.append(IMAGE_PLACEHOLDER)
            at += len(IMAGE_PLACEHOLDER)
    return "\n\n".join(texts), tuple(images), tuple(offsets) if offsets else None


def url_scheme(url: str) -> str | None:
    """The lower-cased scheme of an absolute URL, or None."""
    m = _SCHEME_RE.match(url)
    return m.group(1).lower() if m else None


_B64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_ASCII_SPACE = str.maketrans("", "", " \t\n\r\x0c")


def data_url_base64_ok(data: str) -> bool:
    """The reference's check of a data URL's base64 (Chat, Responses): ASCII whitespace ignored,
    padding optional but at most 2 and only to a multiple of 4, non-zero trailing bits accepted."""
    data = data.translate(_ASCII_SPACE)
    core = data.rstrip("=")
    pads = len(data) - len(core)
    if not set(core) <= _B64_ALPHABET or len(core) % 4 == 1:
        return False
    return pads == 0 or (pads <= 2 and (len(core) + pads) % 4 == 0)


def source_base64_ok(data: str) -> bool:
    """The reference's check of Messages `base64` image data: canonical base64, padding required,
    extra trailing `=` tolerated."""
    core = data.rstrip("=")
    need = -len(core) % 4
    if need == 3 or len(data) - len(core) < need or not set(core) <= _B64_ALPHABET:
        return False
    padded = core + "=" * need
    try:
        decoded = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return False
    return base64.b64encode(decoded).decode("ascii") == padded


def image_source_from_url(url: str, detail: ImageDetail, path: str) -> ImageSource:
    """An image source for a V4.1 prompt (Chat `image_url`, Responses `input_image`).

    Accepted: `http(s)` URLs and base64 `data:` URLs of png/jpeg/gif/webp; `path` (e.g. `.messages[0]`)
    prefixes the error messages, which are the reference's.
    """
    scheme = url_scheme(url)
    if scheme == "data":
        m = _DATA_URL_RE.fullmatch(url)
        if m is None:
            raise conversion_error(f"{path}: Unsupported image_url format")
        if m.group(1).lower() not in _IMAGE_TYPES:
            raise conversion_error(
                f"{path}: You have uploaded an unsupported image. Please make sure your image is valid and has one of the following formats: webp, png, jpeg, and gif."
            )
        if not data_url_base64_ok(m.group(3)):
            raise conversion_error(f"{path}: Invalid base64 data")
        return ImageSource(kind="data_url", detail=detail, data_url=url, path=path)
    if scheme in ("http", "https"):
        return ImageSource(kind="url", detail=detail, url=url, path=path)
    raise conversion_error(f"{path}: Unsupported image_url format")
