"""Drop repeated <script> entries from every page of the book.

With Sphinx 7.4, jupyter-book's inline configuration scripts (thebe's
`const THEBE_JS_URL = ...`, the toggle-button selector) are emitted twice per
page; the second `const` is a SyntaxError in the browser console. This keeps
the first of each identical script and changes nothing else.

It also sets the theme's colour mode to "light" unless the configuration names
one: with the theme's empty default, pydata-sphinx-theme logs "Got invalid
theme mode" as a console error on every page (and the course's figures are
drawn on white).
"""


def _unique_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        attributes = sorted(getattr(script, "attributes", {}).items())
        key = (getattr(script, "filename", None) or "", repr(attributes))  # None and "" alike
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _default_mode(app, config):
    context = dict(config.html_context or {})
    context.setdefault("default_mode", "light")  # pydata-sphinx-theme reads it from the context
    config.html_context = context


def setup(app):
    app.connect("config-inited", _default_mode)
    app.connect("html-page-context", _unique_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
