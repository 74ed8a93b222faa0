import pytest

from harness.durations import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("2m", 120), ("1m30s", 90), ("500ms", 0.5), ("1h", 3600), ("12", 12), (2.5, 2.5), ("0", 0)],
)
def test_durations_people_write(text, seconds) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5s", "-1", "1m 30s", "s", "nan", "inf", True])
def test_nonsense_is_a_clear_error(text) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)
