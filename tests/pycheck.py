"""The check of the Python test scripts: a failed condition raises with its description; passed()
counts the checks that held."""
_passed = 0


def check(cond, what):
    global _passed
    if not cond:
        raise AssertionError(what)
    _passed += 1


def passed():
    return _passed
