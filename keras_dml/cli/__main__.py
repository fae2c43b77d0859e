"""`python -m keras_dml.cli`: the `keras-dml` command."""

import sys

from keras_dml.cli import main

if __name__ == "__main__":  # importing the module (doctest collection) runs nothing
    sys.exit(main())
