#!/usr/bin/env node
// The `quorumq` command: a file that exists before the build, so that `npm install` links it
// (a bin pointing into dist/ is not linked in a fresh clone, where dist/ is built after).
import '../dist/main.js';
