// Reference per-token log-probabilities from llama.cpp, for repairbench's fidelity fixture.
//
// usage: llama-logprobs MODEL.gguf TEXT_FILE N_BATCH N_THREADS
// Tokenizes TEXT_FILE's exact bytes as llama.cpp does (special tokens added as the model's
// metadata asks, e.g. BOS; special-token text not parsed), evaluates every position in
// batches of N_BATCH (n_ubatch = N_BATCH too, so N_BATCH 1 is true token-by-token
// evaluation), and prints JSON: the token ids, whether BOS was added, and for each position i
// the log-probability of token i+1 and the argmax id.
//
// Built by scripts/build-llama-cpp against the libllama it builds.
#include "llama.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL.gguf TEXT_FILE N_BATCH N_THREADS\n", argv[0]);
        return 2;
    }
    const char * model_path = argv[1];
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 2;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    const int n_batch = atoi(argv[3]);
    const int n_threads = atoi(argv[4]);

    llama_backend_init();
    llama_model_params mparams = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(model_path, mparams);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", model_path);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const bool add_bos = llama_vocab_get_add_bos(vocab);

    std::vector<llama_token> tokens(text.size() + 8);
    int n = llama_tokenize(vocab, text.c_str(), (int32_t) text.size(), tokens.data(), (int32_t) tokens.size(),
                           /*add_special*/ true, /*parse_special*/ false);
    if (n < 0) {
        fprintf(stderr, "tokenize failed\n");
        return 1;
    }
    tokens.resize(n);

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = n + 16;
    cparams.n_batch = n_batch;
    cparams.n_ubatch = n_batch;
    cparams.n_threads = n_threads;
    cparams.n_threads_batch = n_threads;
    cparams.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cparams);
    if (!ctx) {
        fprintf(stderr, "cannot create context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(vocab);

    std::vector<double> logprob(n > 0 ? n - 1 : 0);
    std::vector<int> argmax(n > 0 ? n - 1 : 0);
    llama_batch batch = llama_batch_init(n_batch, 0, 1);
    for (int start = 0; start < n; start += n_batch) {
        const int len = std::min(n_batch, n - start);
        batch.n_tokens = len;
        for (int j = 0; j < len; j++) {
            batch.token[j] = tokens[start + j];
            batch.pos[j] = start + j;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = 0;
            batch.logits[j] = 1;
        }
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "decode failed at %d\n", start);
            return 1;
        }
        for (int j = 0; j < len; j++) {
            const int pos = start + j;
            if (pos + 1 >= n) {
                break;
            }
            const float * logits = llama_get_logits_ith(ctx, j);
            double maxv = logits[0];
            int best = 0;
            for (int v = 1; v < n_vocab; v++) {
                if (logits[v] > maxv) {
                    maxv = logits[v];
                    best = v;
                }
            }
            double sum = 0.0;
            for (int v = 0; v < n_vocab; v++) {
                sum += std::exp((double) logits[v] - maxv);
            }
            logprob[pos] = (double) logits[tokens[pos + 1]] - maxv - std::log(sum);
            argmax[pos] = best;
        }
    }
    llama_batch_free(batch);

    printf("{\"add_bos\": %s, \"n_batch\": %d, \"tokens\": [", add_bos ? "true" : "false", n_batch);
    for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", tokens[i]);
    printf("], \"next_logprob\": [");
    for (size_t i = 0; i < logprob.size(); i++) printf("%s%.6f", i ? ", " : "", logprob[i]);
    printf("], \"argmax\": [");
    for (size_t i = 0; i < argmax.size(); i++) printf("%s%d", i ? ", " : "", argmax[i]);
    printf("]}\n");

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
