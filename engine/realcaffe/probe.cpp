// Real Caffe 1.0, stage by stage, as EdgeCaffe drives it: what the resident set is after
// each stage. Built inside the bullseye chroot against Debian's libcaffe-dev.
//
//   probe bulk   WARMUP PROTOTXT CAFFEMODEL INPUT OUTPUT
//       Net(prototxt, TEST) -> CopyTrainedLayersFrom(caffemodel) -> Forward() -> delete
//   probe layers WARMUP PROTOTXT INPUT OUTPUT PARTIAL...
//       Net(prototxt, TEST) -> per layer i: CopyTrainedLayersFrom(partial of i) if it has
//       one, Forward of layer i, layers_unsafe()[i].reset() -> delete
//   probe time   WARMUP PROTOTXT CAFFEMODEL INPUT REPS BATCH
//       REPS times: a new Net (input reshaped to BATCH images; 0 keeps the deploy batch),
//       CopyTrainedLayersFrom, then one timed Forward() (the first, as EdgeCaffe runs
//       each network once): {"forward_ms": ...} per line
//
// One JSON object per line on stdout: {"stage", "layer", "rss_kib", "hwm_kib"}; the
// high-water mark is reset (clear_refs 5) before every stage, so hwm is that stage's peak.
// PARTIAL arguments are "INDEX=PATH" (the runtime layer index the partial belongs to).
// WARMUP is a tiny net that is built, run and deleted before the first report, so that
// what the libraries set up once per process (protobuf's descriptor pool, OpenBLAS's
// buffers) is in the baseline, as the interpreter's is on the engine's side.
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <iostream>
#include <string>
#include <vector>

#include "caffe/caffe.hpp"

using caffe::Blob;
using caffe::Net;

namespace {

long status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t n = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, n, key) == 0) return std::atol(line.c_str() + n + 1);
  }
  return -1;
}

void reset_hwm() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

void report(const char* stage, int layer) {
  struct mallinfo mi = mallinfo();  // glibc's heap: what free() kept resident
  std::printf("{\"stage\": \"%s\", \"layer\": %d, \"rss_kib\": %ld, \"hwm_kib\": %ld, "
              "\"heap_kib\": %d, \"heap_free_kib\": %d, \"mmapped_kib\": %d}\n",
              stage, layer, status_kib("VmRSS:"), status_kib("VmHWM:"), mi.arena / 1024,
              mi.fordblks / 1024, mi.hblkhd / 1024);
  std::fflush(stdout);
  reset_hwm();
}

void read_input(Net<float>* net, const char* path) {
  Blob<float>* in = net->input_blobs()[0];
  std::FILE* f = std::fopen(path, "rb");
  if (!f) { std::perror(path); std::exit(2); }
  size_t got = std::fread(in->mutable_cpu_data(), sizeof(float), in->count(), f);
  std::fclose(f);
  if (got != static_cast<size_t>(in->count())) {
    std::fprintf(stderr, "%s: %zu floats, the input blob has %d\n", path, got, in->count());
    std::exit(2);
  }
}

void write_outputs(Net<float>* net, const char* path) {
  std::FILE* f = std::fopen(path, "wb");
  if (!f) { std::perror(path); std::exit(2); }
  for (size_t i = 0; i < net->output_blobs().size(); ++i) {
    const Blob<float>* b = net->output_blobs()[i];
    std::fwrite(b->cpu_data(), sizeof(float), b->count(), f);
  }
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: probe bulk WARMUP PROTOTXT CAFFEMODEL INPUT OUTPUT | "
                         "probe layers WARMUP PROTOTXT INPUT OUTPUT INDEX=PARTIAL...\n");
    return 2;
  }
  FLAGS_minloglevel = 2;
  google::InitGoogleLogging(argv[0]);
  caffe::Caffe::set_mode(caffe::Caffe::CPU);
  std::string mode = argv[1];
  {
    Net<float> warmup(argv[2], caffe::TEST);
    warmup.Forward();
  }
  argv += 1;
  argc -= 1;
  reset_hwm();
  report("start", -1);
  Net<float>* net = new Net<float>(argv[2], caffe::TEST);
  report("init", -1);
  if (mode == "bulk") {
    if (argc != 6) { std::fprintf(stderr, "probe bulk: 4 arguments\n"); return 2; }
    net->CopyTrainedLayersFrom(argv[3]);
    report("load", -1);
    read_input(net, argv[4]);
    net->Forward();
    report("forward", -1);
    write_outputs(net, argv[5]);
  } else if (mode == "layers") {
    read_input(net, argv[3]);
    report("input", -1);
    std::vector<std::string> partial(net->layers().size());
    for (int a = 5; a < argc; ++a) {
      const char* eq = std::strchr(argv[a], '=');
      if (!eq) { std::fprintf(stderr, "%s: expected INDEX=PATH\n", argv[a]); return 2; }
      size_t i = std::strtoul(argv[a], nullptr, 10);
      if (i >= partial.size()) { std::fprintf(stderr, "%s: no such layer\n", argv[a]); return 2; }
      partial[i] = eq + 1;
    }
    for (size_t i = 0; i < net->layers().size(); ++i) {
      if (!partial[i].empty()) {
        net->CopyTrainedLayersFrom(partial[i]);
        report("load", i);
      }
      net->layers()[i]->Forward(net->bottom_vecs()[i], net->top_vecs()[i]);
      report("forward", i);
      net->layers_unsafe()[i].reset();
      report("reset", i);
    }
    write_outputs(net, argv[4]);
  } else if (mode == "time") {
    if (argc != 7) { std::fprintf(stderr, "probe time: 5 arguments\n"); return 2; }
    delete net;
    int reps = std::atoi(argv[5]), batch = std::atoi(argv[6]);
    for (int r = 0; r < reps; ++r) {
      net = new Net<float>(argv[2], caffe::TEST);
      net->CopyTrainedLayersFrom(argv[3]);
      Blob<float>* in = net->input_blobs()[0];
      if (batch > 0) {
        in->Reshape(batch, in->channels(), in->height(), in->width());
        net->Reshape();
      }
      read_input(net, argv[4]);
      auto t0 = std::chrono::steady_clock::now();
      net->Forward();
      auto t1 = std::chrono::steady_clock::now();
      std::printf("{\"forward_ms\": %.4f}\n",
                  std::chrono::duration<double, std::milli>(t1 - t0).count());
      std::fflush(stdout);
      delete net;
    }
    return 0;
  } else {
    std::fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  delete net;
  report("delete", -1);
  return 0;
}
