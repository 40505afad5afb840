"""Text of the user's files (programs, scripts, CSV facts) from their bytes: UTF-8 or an
error that names the file, line and column of the first byte that is not. The engine does
no I/O; the caller reads the bytes."""

from deltalog.engine.errors import NOT_UTF8, DeltalogSyntaxError, Loc


def decode_source(data: bytes, file: str) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); raises
    ``DeltalogSyntaxError`` DL104 at the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        start = err.start
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise DeltalogSyntaxError(
            f"byte 0x{data[start]:02x} is not UTF-8: the file must be UTF-8 text",
            Loc(file, line, column),
            NOT_UTF8,
        ) from None
