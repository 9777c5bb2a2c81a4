#!/usr/bin/env bash
# The test speech: four Harvard sentences (espeak-ng), telephone band
# (300-3400 Hz), 8 kHz, 16-bit, level -3 dBFS peak, half a second of
# silence each side. Writes OUT/speech-raw.wav (espeak's) and OUT/speech.wav.
# Used by tests/pesq/run.sh and benches/relay_pesq.sh.
#
# usage: tests/pesq/sentences.sh OUT
set -euo pipefail
out=$1
espeak-ng -v en-us -s 150 -w "$out/speech-raw.wav" "The birch canoe slid on the smooth planks. \
Glue the sheet to the dark blue background. It is easy to tell the depth of a well. \
These days a chicken leg is a rare dish."
sox "$out/speech-raw.wav" -r 8000 -c 1 -b 16 -e signed-integer "$out/speech.wav" \
    silence 1 0.01 0.1% reverse silence 1 0.01 0.1% reverse sinc 300-3400 gain -n -3 pad 0.5 0.5
