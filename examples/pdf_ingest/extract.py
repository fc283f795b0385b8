"""The synchronous PDF work, done with PyMuPDF as users do: open the document from bytes, take
each page's text and each embedded image's original encoded bytes.

This is CPU work inside MuPDF (C code): called straight from `async def` it holds the event
loop for its whole duration; `asyncio.to_thread` moves it off the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pymupdf


class NotAPdf(ValueError):
    """The request body is not a PDF that MuPDF can open."""


@dataclass
class Image:
    page: int  # 1-based
    index: int  # order on its page, 1-based
    ext: str  # "png", "jpeg", ... as stored in the PDF
    data: bytes

    @property
    def name(self) -> str:
        return f"page-{self.page}-image-{self.index}.{self.ext}"

    @property
    def mime(self) -> str:
        return f"image/{self.ext}"


@dataclass
class Extracted:
    pages: int
    text_chars: int
    images: list[Image] = field(default_factory=list)


def extract(pdf: bytes) -> Extracted:
    """Text and images of a PDF given as bytes (raises NotAPdf when MuPDF cannot open it)."""
    try:
        doc = pymupdf.open(stream=pdf, filetype="pdf")
    except (pymupdf.FileDataError, RuntimeError, ValueError) as e:
        raise NotAPdf(f"not a readable PDF: {e}") from None
    with doc:
        text_chars = 0
        images: list[Image] = []
        seen: set[int] = set()  # an image drawn on several pages is stored once
        for page in doc:
            text_chars += len(page.get_text("text"))
            index = 0
            for info in page.get_images(full=True):
                xref = info[0]
                if xref in seen:
                    continue
                seen.add(xref)
                raw = doc.extract_image(xref)
                index += 1
                images.append(Image(page.number + 1, index, raw["ext"], raw["image"]))
        return Extracted(doc.page_count, text_chars, images)


def warm_up() -> None:
    """Extract a one-page PDF made on the spot. Called once in a worker thread at start-up,
    it starts that thread and pays MuPDF's first-use costs (fonts, colour spaces) there,
    not in the first requests."""
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "warm-up")
    data = doc.tobytes()
    doc.close()
    extract(data)
