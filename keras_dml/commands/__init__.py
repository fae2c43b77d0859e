"""The `keras-dml` subcommands, one module each.

A command module defines, importing only the standard library at module level (so
`keras-dml --help` never loads TensorFlow):

- `HELP`: one line for `keras-dml --help`;
- `DESCRIPTION`: the paragraph of `keras-dml <command> --help`;
- `add_arguments(parser)`: its options (argparse);
- `run(args)`: does the work (import TensorFlow and keras_dml modules inside it)
  and returns the exit code.

List a new module in `keras_dml.cli.COMMANDS`.
"""
