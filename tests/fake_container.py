"""A stand-in for Apptainer, put first on PATH by tests: no container runtime can be installed on our machines."""

from pathlib import Path

from helpers import fake_tools


def fake_apptainer(bin_dir: Path, log: Path) -> None:
    """`apptainer exec --nv --cleanenv --bind A,B,... IMAGE CMD...`: every bound folder must exist; logs the image
    and the command, then runs it (here, on this machine: the fake's "image" is the host) as --cleanenv does, in an
    environment of the host's PATH and HOME and of each APPTAINERENV_<NAME> variable as NAME, and nothing else."""
    fake_tools(bin_dir, apptainer=f"""\
if [ "$1" != exec ] || [ "$2" != --nv ] || [ "$3" != --cleanenv ] || [ "$4" != --bind ]; then
    echo "fake apptainer: unexpected $*" >&2; exit 64
fi
IFS=, read -ra binds <<< "$5"
for folder in "${{binds[@]}}"; do [ -d "$folder" ] || {{ echo "fake apptainer: no folder $folder" >&2; exit 65; }}; done
echo "$6 $5 ${{*:7}}" >> "{log}"
shift 6
inside=("PATH=$PATH" "HOME=$HOME")
for name in ${{!APPTAINERENV_@}}; do inside+=("${{name#APPTAINERENV_}}=${{!name}}"); done
exec env -i "${{inside[@]}}" "$@"
""")
