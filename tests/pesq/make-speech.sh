#!/usr/bin/env bash
# ~10 s of English speech, telephone band, 8 kHz mono 16-bit: speech8k.wav
set -e
cd "$(dirname "$0")"
espeak-ng -v en-us -s 150 -w speech_raw.wav "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. It is easy to tell the depth of a well. These days a chicken leg is a rare dish."
sox speech_raw.wav -r 8000 -c 1 -b 16 -e signed-integer speech8k.wav \
    silence 1 0.01 0.1% reverse silence 1 0.01 0.1% reverse \
    sinc 300-3400 gain -n -3 pad 0.5 0.5
soxi speech8k.wav
