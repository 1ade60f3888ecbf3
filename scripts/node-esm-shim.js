// Prepended to the ES module glue with emcc --extern-pre-js (see CMakeLists.txt).
// emscripten 3.1.6's ES6 glue still uses require/__dirname/__filename when it
// runs under Node; an ES module has none of them, so define them here. No
// top-level await (keeps require(esm) of the package working on Node >= 20.19);
// process.getBuiltinModule needs Node >= 20.16. Inert in browsers and workers.
const __em_isNode = typeof process == 'object' && typeof process.versions == 'object' &&
  typeof process.versions.node == 'string' && typeof process.getBuiltinModule == 'function';
const require = __em_isNode ? process.getBuiltinModule('module').createRequire(import.meta.url) : undefined;
const __filename = __em_isNode ? process.getBuiltinModule('url').fileURLToPath(import.meta.url) : undefined;
const __dirname = __em_isNode ? process.getBuiltinModule('path').dirname(__filename) : undefined;
