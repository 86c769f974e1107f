"""Image parts of request messages: `[Unsupported Image]` text on V4, image sources on V4.1."""

from __future__ import annotations

import base64
import binascii
import re

from recipe.conversation import ImageDetail, ImageSource
from recipe.errors import conversion_error

IMAGE_PLACEHOLDER = "<｜image｜>"
UNSUPPORTED_IMAGE = "[Unsupported Image]"
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# data:<media type>[;parameters];base64,<data>
_DATA_URL_RE = re.compile(r"data:([^,;]*)((?:;[^,;]*)*);base64,(.*)", re.IGNORECASE | re.DOTALL)
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp"})


def url_scheme(url: str) -> str | None:
    """The lower-cased scheme of an absolute URL, or None."""
    m = _SCHEME_RE.match(url)
    return m.group(1).lower() if m else None


def valid_base64(data: str) -> bool:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


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
        if not valid_base64(m.group(3)):
            raise conversion_error(f"{path}: Invalid base64 data")
        return ImageSource(kind="data_url", detail=detail, data_url=url, path=path)
    if scheme in ("http", "https"):
        return ImageSource(kind="url", detail=detail, url=url, path=path)
    raise conversion_error(f"{path}: Unsupported image_url format")
