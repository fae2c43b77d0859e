"""The `keras-dml` command line: one module per subcommand, the parser in `parser`.

A command module (`train`, `export`, `embed`, `index`, `search`, `calibrate`, `evaluate`,
`verify`) imports at module level only the standard library and keras_dml modules that
load no backend (so `keras-dml --help` never loads TensorFlow) and defines `add_command(commands)`,
which adds its subcommand to the `argparse` sub-parsers with
`set_defaults(handler=run)`; `run(args)` does the work (importing keras_dml's
TensorFlow modules inside) and returns the exit code. List the module in
`parser.COMMAND_MODULES`; `parser.main` imports TensorFlow quietly before `run` is
called, except for a command that sets `light_imports=True` (`serve`, which imports
only what its model needs). Arguments shared by several commands live in `arguments`.

Nothing else in keras_dml imports this package.
"""

from keras_dml.cli.parser import EXTRAS, build_parser, flag_words, load_tensorflow, main

__all__ = ["EXTRAS", "build_parser", "flag_words", "load_tensorflow", "main"]
