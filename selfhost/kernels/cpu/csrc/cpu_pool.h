// Task pool of the CPU kernels: the calling thread and (torch threads - 1) helpers share one job's
// tasks through an atomic counter. The caller never waits for a helper that has not started (on
// cores shared with other processes a descheduled helper would stall a barrier-based region for a
// time slice); it waits only for tasks a helper already claimed. A helper that finishes a job
// spins for a short while (kSpinUs, 100 us) watching for the next one before it sleeps:
// a decode step is ~150 jobs of 10-100 us each, and waking a sleeping helper through the kernel
// costs about as much as one job, so it joined small GEMVs late or not at all.
#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace lantern {

class TaskPool {
 public:
  using Task = std::function<void(int64_t)>;

  explicit TaskPool(int helpers) {
    for (int i = 0; i < helpers; ++i) std::thread([this] { help(); }).detach();
    num_helpers_ = helpers;
  }

  // The pool of this process, sized by torch's intra-op thread count at first use; never freed
  // (helpers are detached and sleep between jobs).
  static TaskPool& instance() {
    static TaskPool* pool = new TaskPool(std::max(0, at::get_num_threads() - 1));
    return *pool;
  }

  // Runs task(0) .. task(n - 1), each exactly once, and returns when all have finished.
  // Callers on other threads (the kernels release the GIL) and a task that calls back in run
  // their job alone while one is in flight: the pool holds one job at a time.
  void run(int64_t n, const Task& task) {
    if (n <= 1 || num_helpers_ == 0 || in_flight_.exchange(true, std::memory_order_acquire)) {
      for (int64_t i = 0; i < n; ++i) task(i);
      return;
    }
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag.store(false, std::memory_order_release); }
    } done_guard{in_flight_};
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      generation = generation_.load(std::memory_order_relaxed) + 1;
      task_ = &task;
      total_ = n;
      done_.store(0);
      next_.store(generation << 32);
      generation_.store(generation, std::memory_order_release);
    }
    // a helper that went to sleep did so under the lock, so it is counted here by now
    if (sleepers_.load() > 0) wake_.notify_all();
    work(generation, n, &task);
    for (int spins = 0; done_.load() < n; ++spins) {  // only tasks a helper is running now
      if (spins < 4096) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  // Claims tasks of `generation` until none is left; returns at once for a finished job.
  void work(uint64_t generation, int64_t n, const Task* task) {
    uint64_t claim = next_.load();
    while ((claim >> 32) == generation && static_cast<int64_t>(claim & 0xFFFFFFFFu) < n) {
      if (next_.compare_exchange_weak(claim, claim + 1)) {
        (*task)(static_cast<int64_t>(claim & 0xFFFFFFFFu));
        done_.fetch_add(1);
        claim = next_.load();
      }
    }
  }

  void help() {
    uint64_t seen = 0;
    for (;;) {
      spin_for_job(seen);
      std::unique_lock<std::mutex> lock(mutex_);
      if (generation_.load(std::memory_order_relaxed) == seen) {
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load(std::memory_order_relaxed);
      const Task* task = task_;
      const int64_t n = total_;
      lock.unlock();
      work(seen, n, task);  // the caller keeps *task alive until every claimed task is done
    }
  }

  // Returns when a job after `seen` was published or kSpinUs passed (the clock is read every
  // 64 pauses: a pause is ~10-140 cycles, a clock read ~20 ns).
  void spin_for_job(uint64_t seen) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinUs);
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (generation_.load(std::memory_order_acquire) != seen) return;
        _mm_pause();
      }
      if (std::chrono::steady_clock::now() >= until) return;
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  static constexpr int64_t kSpinUs = 100;
  std::atomic<bool> in_flight_{false};  // a job is published and not yet finished
  const Task* task_ = nullptr;
  int64_t total_ = 0;
  std::atomic<uint64_t> next_{0};  // generation << 32 | next task index
  std::atomic<int64_t> done_{0};
  int num_helpers_ = 0;
};

inline void parallel_tasks(int64_t n, const TaskPool::Task& task) { TaskPool::instance().run(n, task); }

}  // namespace lantern
