"""`pgsched dashboard`: a web UI over the database (install the `dashboard` extra).

app        the pages, the forms that change state, their guards (read-only, CSRF)
security   binding rules, the token check, CSRF tokens
templates  Jinja2 pages; static: the stylesheet (no CDN, nothing fetched from elsewhere)
"""
