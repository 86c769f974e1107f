"""Image parts of request messages: `[Unsupported Image]` text on V4, image sources on V4.1."""

from __future__ import annotations

import re

from recipe.conversation import ImageDetail, ImageSource
from recipe.errors import conversion_error

IMAGE_PLACEHOLDER = "<｜image｜>"
UNSUPPORTED_IMAGE = "[Unsupported Image]"
_DATA_IMAGE_RE = re.compile(r"data:image/(png|jpeg|jpg|gif|webp)[;,]", re.IGNORECASE)


def image_source_from_url(url: str, detail: ImageDetail, path: str) -> ImageSource:
    """An image source for a V4.1 prompt; `path` prefixes error messages (e.g. `.messages[0]`)."""
    if url.startswith("data:"):
        if not _DATA_IMAGE_RE.match(url):
            raise conversion_error(
                f"{path}: You have uploaded an unsupported image. Please make sure your image is valid and has one of the following formats: webp, png, jpeg, and gif."
            )
        return ImageSource(kind="data_url", detail=detail, data_url=url, path=path)
    lowered = url[:8].lower()
    if lowered.startswith(("http://", "https://")):
        return ImageSource(kind="url", detail=detail, url=url, path=path)
    raise conversion_error(f"{path}: Unsupported image_url format")
