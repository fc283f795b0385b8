"""Generate the sample PDFs the example ingests: pages of text with embedded images, made with
PyMuPDF itself (no download, no second PDF library).

    python examples/pdf_ingest/samples.py [--out DIR] [--pages N] [--images N]

`make_pdf()` returns the bytes; the tests and the load tool call it directly, so nothing has to
be generated beforehand. The output is deterministic: the same arguments give the same bytes.
"""

from __future__ import annotations

import argparse
import pathlib
import zlib

import pymupdf

PARAGRAPH = (
    "Invoice {page}.{n}: the customer ordered {qty} units of part {part} at {price:.2f} each, "
    "to be shipped from warehouse {wh} within {days} days. Terms are net thirty; late payment "
    "accrues interest at the statutory rate. This paragraph exists so that text extraction has "
    "real work to do, as it has on the scanned-and-OCRed contracts users upload. "
)


def _text(page_no: int, paragraphs: int) -> str:
    return "".join(
        PARAGRAPH.format(
            page=page_no,
            n=n,
            qty=(page_no * 7 + n) % 90 + 1,
            part=f"PX-{(page_no * 131 + n * 17) % 9973:04d}",
            price=((page_no + 3) * (n + 5)) % 500 / 3,
            wh=(n % 9) + 1,
            days=(page_no + n) % 20 + 2,
        )
        for n in range(paragraphs)
    )


def _image(seed: int, width: int, height: int) -> pymupdf.Pixmap:
    """A deterministic RGB picture (bands plus noise, so PNG cannot shrink it to nothing)."""
    rows = []
    for y in range(height):
        noise = zlib.crc32(f"{seed}:{y}".encode())
        row = bytearray(width * 3)
        for x in range(width):
            v = (noise >> (x % 24)) & 0x07
            row[3 * x] = (x * 3 + seed * 40) & 0xFF
            row[3 * x + 1] = (y * 2 + v) & 0xFF
            row[3 * x + 2] = ((x ^ y) + seed * 11) & 0xFF
        rows.append(bytes(row))
    return pymupdf.Pixmap(pymupdf.csRGB, width, height, b"".join(rows), False)


def make_pdf(pages: int = 6, images: int = 4, paragraphs: int = 12) -> bytes:
    """A PDF of `pages` pages of text; `images` distinct pictures spread over the pages."""
    if pages < 1 or images < 0 or paragraphs < 0:
        raise ValueError(
            f"need pages >= 1, images >= 0, paragraphs >= 0 (got {pages}, {images}, {paragraphs})"
        )
    doc = pymupdf.open()
    for p in range(pages):
        page = doc.new_page()  # A4-ish default (595 x 842 pt)
        page.insert_textbox(pymupdf.Rect(40, 40, 555, 560), _text(p, paragraphs), fontsize=8)
    for i in range(images):
        page = doc[i % pages]
        slot = i // pages  # a second picture on the same page goes beside the first
        rect = pymupdf.Rect(40 + slot * 260, 580, 290 + slot * 260, 790)
        page.insert_image(rect, pixmap=_image(i, 160, 120))
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("."), help="directory")
    ap.add_argument("--pages", type=int, default=6)
    ap.add_argument("--images", type=int, default=4)
    args = ap.parse_args(argv)
    try:
        data = make_pdf(args.pages, args.images)
    except ValueError as e:
        ap.error(str(e))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"sample-{args.pages}p-{args.images}i.pdf"
    path.write_bytes(data)
    print(f"{path}: {len(data)} bytes, {args.pages} pages, {args.images} images")


if __name__ == "__main__":
    main()
