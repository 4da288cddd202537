from slug import slugify


def test_spaces() -> None:
    assert slugify("Hello World") == "hello-world"


def test_punctuation_is_dropped() -> None:
    assert slugify("Hello,  World!") == "hello-world"


def test_no_leading_or_trailing_hyphens() -> None:
    assert slugify("  -- Rust & Python --  ") == "rust-python"
