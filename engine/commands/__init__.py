"""The verbs of ``python -m engine``, one module each; ``engine.cli`` registers them.

Each module has ``add_parser(subparsers)``, which adds the verb's parser and sets its
``func``, and the function itself. A verb imports the stages it runs inside that function,
so ``python -m engine child`` and ``--help`` stay fast. This file imports none of them.
"""
