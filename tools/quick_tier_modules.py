"""Which quick-tier test files reach each keras_dml module (a static map, no test runs).

A test file reaches a module directly when it names the module (`keras_dml.losses.circle`,
`from keras_dml.losses import circle`, `load("cub200")`) or a class or function the module
defines; a module imported by a directly reached module is reached through it (its
code runs when the importer's does, e.g. `datasets.load` -> `datasets.cub200`). Files
marked slow as a whole (`pytestmark = pytest.mark.slow`) do not count. Prints one line a
module (direct test files, or the module it is reached through) and exits 1 when some
module is not reached.

    python tools/quick_tier_modules.py
"""

import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def modules():
    """{dotted module name: (names of the classes and functions it defines, modules it
    imports)}."""
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "keras_dml")):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            dotted = dotted.removesuffix(".__init__")
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            names = {node.name for node in tree.body
                     if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                     and not node.name.startswith("_")}
            found[dotted] = (names, _imports(tree))
    return found


def _imports(tree):
    """The keras_dml modules a module imports, anywhere in it (also in functions), and the
    modules named in strings as "keras_dml.x.y" (lazy imports through importlib)."""
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            imported |= set(re.findall(r"keras_dml(?:\.\w+)+", node.value))
    return {name for name in imported if name.startswith("keras_dml")}


def quick_test_files():
    """{file name: its text}, for the test files not marked slow as a whole."""
    tests = {}
    for name in sorted(os.listdir(os.path.join(ROOT, "tests"))):
        if name.startswith("test_") and name.endswith(".py"):
            with open(os.path.join(ROOT, "tests", name), encoding="utf-8") as handle:
                text = handle.read()
            if not re.search(r"^pytestmark = pytest\.mark\.slow", text, re.M):
                tests[name] = text
    return tests


def reaches(text, module, names):
    package, _, leaf = module.rpartition(".")
    if re.search(rf"\b{re.escape(module)}\b", text):
        return True
    if leaf and re.search(rf"from {re.escape(package)} import [^\n]*\b{leaf}\b", text):
        return True
    if leaf and re.search(rf"[\"']{leaf}[\"']", text):
        return True
    return any(re.search(rf"\b{re.escape(name)}\b", text) for name in names)


def main():
    tests, found = quick_test_files(), modules()
    direct = {module: [name for name, text in tests.items() if reaches(text, module, names)]
              for module, (names, _) in found.items()}
    through = {}
    frontier = [module for module, files in direct.items() if files]
    while frontier:
        module = frontier.pop()
        for imported in found[module][1]:
            if imported in found and not direct[imported] and imported not in through:
                through[imported] = module
                frontier.append(imported)
    missing = []
    for module in sorted(found):
        if direct[module]:
            print(f"{module:42} {' '.join(direct[module][:4])}"
                  + (f" (+{len(direct[module]) - 4})" if len(direct[module]) > 4 else ""))
        elif module in through:
            print(f"{module:42} through {through[module]}")
        else:
            print(f"{module:42} -")
            missing.append(module)
    if missing:
        print(f"no quick test reaches: {', '.join(missing)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
