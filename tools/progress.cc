#include "tools/progress.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

namespace croupier::cli {

Progress::Progress(std::string label, uint64_t total_bytes)
    : label_(std::move(label)),
      total_(total_bytes),
      tty_(::isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {}

Progress::Progress(std::string label, uint64_t total, std::string items)
    : Progress(std::move(label), total) {
  items_ = std::move(items);
}

Progress::~Progress() {
  if (tty_ && drawn_) std::fputc('\n', stderr);
}

void Progress::Update(uint64_t done, const std::string& detail) {
  double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  if (frac > 1) frac = 1;
  auto now = std::chrono::steady_clock::now();
  double secs = std::chrono::duration<double>(now - start_).count();
  double mbps = secs > 0 ? done / 1e6 / secs : 0;
  // "12.5/40.0 MB 30 MB/s", or "120/400 batches 15.0/s".
  char figures[128];
  if (items_.empty()) {
    std::snprintf(figures, sizeof(figures), "%.1f/%.1f MB %.0f MB/s", done / 1e6, total_ / 1e6,
                  mbps);
  } else {
    std::snprintf(figures, sizeof(figures), "%llu/%llu %s %.1f/s",
                  static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
                  items_.c_str(), secs > 0 ? done / secs : 0.0);
  }
  if (tty_) {
    if (drawn_ && frac < 1 && now - last_draw_ < std::chrono::milliseconds(100)) return;
    constexpr int kWidth = 30;
    int filled = static_cast<int>(frac * kWidth);
    std::string bar(filled, '#');
    bar.append(kWidth - filled, '.');
    std::fprintf(stderr, "\r%s [%s] %3.0f%% %s %s\x1b[K", label_.c_str(), bar.c_str(),
                 frac * 100, figures, detail.c_str());
    last_draw_ = now;
  } else {
    int tenth = static_cast<int>(frac * 10);
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
    std::fprintf(stderr, "%s %3d%% %s %s\n", label_.c_str(), tenth * 10, figures,
                 detail.c_str());
  }
  drawn_ = true;
  std::fflush(stderr);
}

}  // namespace croupier::cli
