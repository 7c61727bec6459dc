// compute_lane.cpp -- the process's evaluating thread; see compute_lane.h.

#include "compute_lane.h"
#include "job.h"

#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

namespace el {

namespace {

thread_local bool on_lane = false;

class Lane {
  public:
    // The thread is detached and the lane never freed: a handle left open at exit must
    // not make exit wait for its evaluation, and nothing of the lane outlives the process.
    Lane() { std::thread([this] { loop(); }).detach(); }

    int32_t run(const std::function<int32_t()> & fn) {
        Job job{&fn};
        std::unique_lock<std::mutex> lock(mu_);
        jobs_.push_back(&job);
        work_.notify_one();
        done_.wait(lock, [&] { return job.done; });
        return job.outcome();
    }

  private:
    void loop() {
        on_lane = true;
        name_this_thread("el-compute");
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            work_.wait(lock, [&] { return !jobs_.empty(); });
            Job * job = jobs_.front();
            jobs_.pop_front();
            lock.unlock();
            job->run();
            lock.lock();
            job->done = true;
            done_.notify_all();
        }
    }

    std::mutex              mu_;
    std::condition_variable work_;
    std::condition_variable done_;
    std::deque<Job *>       jobs_;
};

std::mutex lane_mu;
Lane *     lane = nullptr;

// In a child of fork() only the forking thread exists: the parent's lane has no thread
// there, and lane_mu may have been held by a thread that is gone.
void forget_lane_in_child() {
    new (&lane_mu) std::mutex();
    lane = nullptr;
}

Lane & the_lane() {
    static const bool registered = pthread_atfork(nullptr, nullptr, forget_lane_in_child) == 0;
    (void) registered;
    std::lock_guard<std::mutex> lock(lane_mu);
    if (lane == nullptr) {
        lane = new Lane();
    }
    return *lane;
}

}  // namespace

void name_this_thread(const char * name) {
#ifdef __linux__
    pthread_setname_np(pthread_self(), name);
#else
    (void) name;
#endif
}

int32_t on_compute_lane(const std::function<int32_t()> & fn) {
    return on_lane ? fn() : the_lane().run(fn);
}

}  // namespace el
