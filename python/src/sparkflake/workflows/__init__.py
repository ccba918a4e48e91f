"""One request → result function per command, above every stage and below the CLI.

Each workflow takes one typed request (a frozen dataclass) and a progress object
(``progress.Progress``), calls the stages in flow order and returns one typed result; it
never prints (``cli/`` parses, builds the request, calls the workflow and prints).
"""
