"""The streaming palette PNG writer of distnet predict's masks, against Pillow's decoder."""
import numpy as np
import pytest

from distnet.data.mask_png import PalettePNG, class_palette, fixed_palette

Image = pytest.importorskip("PIL.Image")


@pytest.mark.parametrize("bands", [[7], [3, 4], [1, 1, 5]])
def test_bands_decode_to_the_mask_and_its_palette(tmp_path, bands):
    rng = np.random.RandomState(0)
    mask = rng.randint(0, 5, size=(7, 11)).astype(np.uint8)
    palette = fixed_palette(5)
    png = PalettePNG(tmp_path / "m.png", 11, 7, palette)
    y = 0
    for h in bands:
        png.write_rows(mask[y:y + h])
        y += h
    png.close()
    im = Image.open(tmp_path / "m.png")
    assert im.mode == "P" and im.size == (11, 7)
    np.testing.assert_array_equal(np.array(im), mask)
    assert im.getpalette()[:15] == palette.ravel().tolist()


def test_a_large_mask_spans_several_idat_chunks(tmp_path):
    mask = np.random.RandomState(1).randint(0, 256, size=(300, 400)).astype(np.uint8)
    png = PalettePNG(tmp_path / "m.png", 400, 300, fixed_palette(256))
    for y in range(0, 300, 32):
        png.write_rows(mask[y:y + 32])
    png.close()
    assert (tmp_path / "m.png").read_bytes().count(b"IDAT") > 1
    np.testing.assert_array_equal(np.array(Image.open(tmp_path / "m.png")), mask)


def test_missing_or_extra_rows_are_refused(tmp_path):
    png = PalettePNG(tmp_path / "m.png", 4, 3, fixed_palette(2))
    png.write_rows(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="band"):
        png.write_rows(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="2 of 3 rows"):
        png.close()


def test_the_palette_takes_the_training_colours_and_fills_the_rest():
    assert fixed_palette(4).tolist() == [[0, 0, 0], [128, 0, 0], [0, 128, 0], [128, 128, 0]]
    assert len({tuple(c) for c in fixed_palette(256)}) == 256
    p = class_palette(4, ["000000", "dc3c3c", "", b"466ee6"])
    assert p.tolist() == [[0, 0, 0], [220, 60, 60], [0, 128, 0], [70, 110, 230]]
