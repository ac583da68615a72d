"""Games and scenarios written as plain workflows on the public API."""
