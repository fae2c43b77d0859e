"""The `keras-dml` subcommands.

A command module imports only the standard library at module level (so
`keras-dml --help` never loads TensorFlow) and defines `add_commands(commands)`,
which adds its subcommands to the `argparse` sub-parsers with `set_defaults(
handler=run)`; `run(args)` does the work (importing TensorFlow and keras_dml inside)
and returns the exit code. List the module in `keras_dml.cli.COMMAND_MODULES`.
TensorFlow is imported quietly by `keras_dml.cli` before `run` is called.
"""
