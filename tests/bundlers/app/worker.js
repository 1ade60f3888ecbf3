// The bundled worker: imports the package by name, as an app would.
import { createSdpa } from 'sdpa-wasm';
import { decode } from './decode.js';

self.onmessage = async (e) => self.postMessage(await decode(createSdpa, e.data));
