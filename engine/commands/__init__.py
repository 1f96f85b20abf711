"""The verbs of ``python -m engine``, one module each; ``engine.cli`` names them and
imports the one a command runs (every one for ``--help``).

Each module has ``add_parser(subparsers)``, which adds the verb's parser and sets its
``func``, and the function itself. A verb imports the stages it runs inside that function,
so ``--help`` stays fast. This file imports none of them.
"""
