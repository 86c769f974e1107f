import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_server import ServerThread, create_app

API_KEY = "test-key-123"


@pytest.fixture(scope="module")
def good_server() -> Iterator[str]:
    with ServerThread(create_app(frozenset(), api_key=API_KEY)) as url:
        yield url
