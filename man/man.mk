## Manual pages.
