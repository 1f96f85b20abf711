# Config (validated against its JSON schema before any job runs), the network list, and
# the default target. Rules call the engine's CLI with the interpreter running Snakemake.
import sys
from pathlib import Path

from snakemake.utils import validate

from engine.caffe.zoo import ZOO


configfile: "config/config.yaml"


validate(config, "../schemas/config.schema.yaml")

PY = sys.executable
RESULTS = config["results"]
USER_MODELS = config["models"]["user_dir"]
# stem -> display name; zoo networks are generated, user models come from USER_MODELS.
ZOO_STEMS = {ZOO[name].stem: name for name in config["models"]["zoo"]}
USER_STEMS = {stem: stem for stem in config["models"]["user"]}
NETWORKS = {**ZOO_STEMS, **USER_STEMS}
# Engine sources as inputs, so a change to the code of a stage reruns that stage.
CODE_CAFFE = sorted(str(p) for p in Path("engine/caffe").glob("*.py"))

def model_files(wildcards):
    folder = f"{RESULTS}/models" if wildcards.stem in ZOO_STEMS else USER_MODELS
    return {
        "caffemodel": f"{folder}/{wildcards.stem}.caffemodel",
        "prototxt": f"{folder}/{wildcards.stem}.prototxt",
    }


# What `rule all` (in the Snakefile) builds.
TARGETS = expand(f"{RESULTS}/split/{{stem}}.description.json", stem=NETWORKS)
