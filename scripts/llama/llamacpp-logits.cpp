// llamacpp-logits.cpp: llama.cpp's logits for a token sequence, every position, as float32
// little-endian [n, vocab] to a file (one decode of the whole sequence, 1 thread, float32 KV
// cache so that only llama.cpp's own products differ from ours). Used by
// scripts/llama/llamacpp-vs-converter.mjs; built against a native llama.cpp build
// (docs/BUILDING.md section 6):
//   g++ -O2 -std=c++17 -fopenmp scripts/llama/llamacpp-logits.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//     $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \
//     -lpthread -lm -o llamacpp-logits          (B: a build with -DBUILD_SHARED_LIBS=OFF)
// usage: llamacpp-logits model.gguf out.bin id id id ...
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s model.gguf out.bin ids...\n", argv[0]); return 2; }
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "llamacpp-logits: %s did not load\n", argv[1]); return 1; }
    std::vector<llama_token> ids;
    for (int i = 3; i < argc; i++) ids.push_back(atoi(argv[i]));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    llama_context * ctx = llama_init_from_model(model, cp);
    llama_batch batch = llama_batch_init((int) ids.size(), 0, 1);
    for (size_t i = 0; i < ids.size(); i++) {
        batch.token[i] = ids[i]; batch.pos[i] = (int) i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0; batch.logits[i] = 1;
    }
    batch.n_tokens = (int) ids.size();
    if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "llamacpp-logits: decode failed\n"); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE * f = fopen(argv[2], "wb");
    for (size_t i = 0; i < ids.size(); i++) fwrite(llama_get_logits_ith(ctx, (int) i), sizeof(float), n_vocab, f);
    fclose(f);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
