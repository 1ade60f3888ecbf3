// Appended to both wasm glues with emcc --post-js (see CMakeLists.txt).
// The threaded build exports Module.wasmMemory by itself; the single-thread
// build keeps it private in 3.1.6 (EXPORTED_RUNTIME_METHODS ignores it), so
// publish the WebAssembly.Memory object the same way in both. It is set before
// the factory's promise resolves and never changes (growth replaces only
// .buffer): JS builds views from Module.wasmMemory.buffer after every call.
addOnInit(function () { Module['wasmMemory'] = wasmMemory; });
